"""The data path below the runtime: the env spec of the wire, the learner's batches of unrolls, the prioritized replay and its data source, frame stacks kept once per frame."""
