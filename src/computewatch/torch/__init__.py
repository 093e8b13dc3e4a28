"""PyTorch helpers for computewatch: counted FLOPs of a step, and the training-loop
integrations. Importing this package needs PyTorch installed."""

from computewatch.torch.cuda import GpuTimer as GpuTimer
from computewatch.torch.cuda import gpu_phase as gpu_phase
from computewatch.torch.distributed import watch_collectives as watch_collectives
from computewatch.torch.distributed import watch_ddp as watch_ddp
from computewatch.torch.flops import count_flops as count_flops
from computewatch.torch.flops import count_flops_by_module as count_flops_by_module
from computewatch.torch.loop import batch_size as batch_size
from computewatch.torch.loop import steps as steps
