import torch

from enginekit.runner import Runner

first = Runner(torch.nn.Linear(2, 2), launcher="pytorch")
second = Runner(torch.nn.Linear(2, 2), launcher="pytorch")
