import torch


def pin_gpu(index):
    torch.cuda.set_device(index)


def use_cpu():
    torch.set_default_dtype(torch.float32)
