"""What env packages share below their own code: the envpool adapter, env seeds and a throughput probe."""
