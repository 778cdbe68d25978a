"""The DDP wrapper and the model (issue 25, helper "model"): what makes a value the wrapper, and the
forms of a training step that skip it. Each case fails without the change it pins."""
from __future__ import annotations

import textwrap

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source


def _lines(code: str, src: str, name: str = "train.py") -> list[int]:
    text = textwrap.dedent(src)
    return sorted(f.range.start.line + 1 for f in check_source(text, name, Settings(select=[code])).findings
                  if f.code == code)


def test_prepared_model_known_by_its_unwrap_elsewhere_in_a_file_without_torch():
    # no "torch" in the file, no module constructor in sight: the class unwraps the same attribute
    # in another method, so it is a model Accelerate wraps
    src = """
        from accelerate import Accelerator


        class Trainer:
            def __init__(self, model, optimizer):
                self.accelerator = Accelerator()
                self.model, self.optimizer = self.accelerator.prepare(model, optimizer)

            def generate(self, ids):
                return self.accelerator.unwrap_model(self.model).generate(ids)

            def save(self, path):
                self.model.save_pretrained(path)
    """
    assert _lines("DDP210", src) == [14]


def test_prepared_optimizer_and_loader_are_not_models():
    src = """
        from accelerate import Accelerator


        def run(model, optimizer, loader):
            accelerator = Accelerator()
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            for batch in loader:
                loss = model(batch).mean()
                accelerator.backward(loss)
                optimizer.step()
            return optimizer.param_groups, loader.total_batch_size, optimizer.custom_attr
    """
    assert _lines("DDP210", src) == []


def test_prepared_value_called_but_never_trained_is_not_assumed_a_model():
    src = """
        from accelerate import Accelerator


        def score(scorer, loader):
            accelerator = Accelerator()
            scorer, loader = accelerator.prepare(scorer, loader)
            for batch in loader:
                print(scorer(batch), scorer.threshold)
    """
    assert _lines("DDP210", src) == []


def test_type_test_of_a_model_class_on_the_wrapper_in_a_helper():
    src = """
        import torch
        from torch import nn
        from torch.nn.parallel import DistributedDataParallel as DDP


        class Net(nn.Module):
            def forward(self, x):
                return x


        def is_net(m):
            return isinstance(m, Net)


        def step(model, x):
            if is_net(model):
                return model(x)
            return None


        def main():
            model = DDP(Net().cuda())
            return step(model, torch.ones(1))
    """
    assert _lines("DDP210", src) == [17]


def test_type_test_of_a_non_model_class_is_not_flagged():
    src = """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP


        class Config:
            pass


        def main(net):
            model = DDP(net.cuda())
            return isinstance(model, Config), isinstance(model, torch.nn.Module)
    """
    assert _lines("DDP210", src) == []


def test_original_module_called_while_a_conditional_wrapper_holds_it():
    # the wrapper is bound through a conditional expression; the step runs the original
    src = """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP


        class Trainer:
            def __init__(self, model, rank, distributed):
                self.model = model.cuda(rank)
                self.ddp = DDP(self.model, device_ids=[rank]) if distributed else None
                self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

            def step(self, x):
                loss = self.model(x).sum()
                loss.backward()
                self.opt.step()
    """
    assert _lines("DDP207", src) == [13]


def test_module_outside_ddp_needs_its_parameters_in_the_optimizer():
    src = """
        import torch
        from torch import nn
        from torch.nn.parallel import DistributedDataParallel as DDP


        def step(loader, gpu, finetune):
            encoder = nn.Linear(8, 8).cuda(gpu)
            head = DDP(nn.Linear(8, 2).cuda(gpu), device_ids=[gpu])
            params = list(head.parameters())
            if finetune:
                params.extend(encoder.parameters())
            opt = torch.optim.SGD(params, lr=0.1)
            for x, y in loader:
                loss = nn.functional.cross_entropy(head(encoder(x)), y)
                loss.backward()
                opt.step()


        def frozen(loader, gpu):
            encoder = nn.Linear(8, 8).cuda(gpu)
            head = DDP(nn.Linear(8, 2).cuda(gpu), device_ids=[gpu])
            opt = torch.optim.SGD(head.parameters(), lr=0.1)
            for x, y in loader:
                loss = nn.functional.cross_entropy(head(encoder(x)), y)
                loss.backward()
                opt.step()
    """
    assert _lines("DDP207", src) == [15]


_BN_PREPARE = """
    import torch
    from accelerate import Accelerator
    from torch import nn


    def main(loader):
        accelerator = Accelerator()
        model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model, opt = accelerator.prepare(model, opt)
        for x in loader:
            accelerator.backward(model(x).mean())
"""


def test_batchnorm_model_prepared_by_accelerate():
    assert _lines("DDP206", _BN_PREPARE) == [11]


def test_batchnorm_model_prepared_in_a_test_file_runs_one_process():
    assert _lines("DDP206", _BN_PREPARE, name="tests/test_prepare.py") == []


def test_sequential_without_batchnorm_beside_one_elsewhere_in_the_file():
    src = """
        import torch
        from torch import nn
        from torch.nn.parallel import DistributedDataParallel


        def other():
            return nn.BatchNorm2d(4)


        def run(gpu):
            model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 10)).cuda(gpu)
            return DistributedDataParallel(model, device_ids=[gpu])
    """
    assert _lines("DDP206", src) == []
