"""DDP015 and the project's shell launchers (fresh22, Adam-mini's RLHF steps): the main rank writes
into ``args.output_dir`` before a helper makes it, but every script that launches the program runs
``mkdir -p $OUT`` first and passes ``--output_dir $OUT``. Each near miss keeps the finding: a
launcher that makes no folder, or makes it after the launch, or only in a comment, a launch that
passes no ``--output_dir``, another option's folder, and no launcher at all."""
from __future__ import annotations

import textwrap

import pytest

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_file

TRAIN = textwrap.dedent('''\
    import argparse, json, os
    import torch, torch.distributed as dist


    def save(out_dir, model):
        os.makedirs(out_dir, exist_ok=True)
        torch.save(model.state_dict(), os.path.join(out_dir, "model.pt"))


    def main():
        p = argparse.ArgumentParser()
        p.add_argument("--output_dir", type=str)
        p.add_argument("--log-dir", dest="log_dir", type=str)
        args = p.parse_args()
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        model = torch.nn.Linear(2, 2)
        if dist.get_rank() == 0:
            with open(os.path.join(args.output_dir, "args.json"), "w") as f:
                json.dump(vars(args), f)
        dist.barrier()
        if dist.get_rank() == 0:
            save(args.output_dir, model)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    ''')


def _lines(tmp_path, scripts: dict[str, str]) -> list[int]:
    (tmp_path / "pyproject.toml").write_text("")
    prog = tmp_path / "steps" / "step1" / "main.py"
    prog.parent.mkdir(parents=True)
    prog.write_text(TRAIN)
    for rel, text in scripts.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    res = check_file(str(prog), Settings(select=["DDP015"], root=str(tmp_path)))
    return [f.range.start.line + 1 for f in res.findings]


OK = 'OUT="${BASE}/out/step1"\nmkdir -p $OUT\ndeepspeed --master_port 29500 ../../steps/step1/main.py \\\n  --zero 2 \\\n  --output_dir ${OUT}\n'


def test_every_launcher_makes_the_folder_it_passes(tmp_path):
    assert _lines(tmp_path, {"scripts/sft/run.sh": OK,
                             "scripts/other/run.sh": "mkdir -p runs/a/logs\ntorchrun --nproc_per_node 2 "
                                                     "steps/step1/main.py --output_dir=runs/a\n"}) == []


@pytest.mark.parametrize("script", [
    'OUT=out\ntorchrun --nproc_per_node 4 steps/step1/main.py --output_dir $OUT\n',  # no mkdir
    'OUT=out\ntorchrun --nproc_per_node 4 steps/step1/main.py --output_dir $OUT\nmkdir -p $OUT\n',  # after
    'OUT=out\n# mkdir -p $OUT\ntorchrun --nproc_per_node 4 steps/step1/main.py --output_dir $OUT\n',  # a comment
    'OUT=out\nmkdir -p $OUT\ntorchrun --nproc_per_node 4 steps/step1/main.py\n',  # the option's default
    'OUT=out\nmkdir -p $OUT\ntorchrun --nproc_per_node 4 steps/step1/main.py --log-dir $OUT --output_dir x\n',
    'mkdir -p out\ntorchrun --nproc_per_node 4 steps/step1/main.py --output_dir out/run\n',  # a folder below
])
def test_a_launch_that_does_not_make_the_folder_keeps_the_finding(tmp_path, script):
    assert _lines(tmp_path, {"run.sh": script}) == [19]


def test_one_launcher_without_the_folder_keeps_the_finding(tmp_path):
    bad = "torchrun --nproc_per_node 4 ../steps/step1/main.py --output_dir fresh\n"
    assert _lines(tmp_path, {"scripts/sft/run.sh": OK, "scripts/run_fresh.sh": bad}) == [19]


def test_no_launcher_keeps_the_finding(tmp_path):
    assert _lines(tmp_path, {"scripts/run_other.sh": "mkdir -p o\ntorchrun other.py --output_dir o\n"}) == [19]
