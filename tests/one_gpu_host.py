"""``python -m tests.one_gpu_host ARGS``: torchbeast_gym's launcher on a host that shows one CUDA device, for
tests on machines without one (torch.cuda's answers are faked; any call that would use the device fails loudly).
Under ``torchrun --nproc_per_node 2`` each rank must refuse the host before it touches the GPU."""

import torch


def _no_device(*args, **kwargs):
    raise AssertionError("tests.one_gpu_host: a rank used the (faked) GPU")


torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
torch.cuda.set_device = _no_device

if __name__ == "__main__":
    from torchbeast_gym.polybeast import main

    main()
