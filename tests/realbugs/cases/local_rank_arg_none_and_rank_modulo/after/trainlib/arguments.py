import argparse
import os


def add_dist_args(parser):
    group = parser.add_argument_group("distributed")
    group.add_argument("--dist-backend", default="nccl", choices=["nccl", "gloo"])
    group.add_argument("--local-rank", type=int, default=int(os.getenv("LOCAL_RANK", "0")),
                       help="rank on this node, from the launcher")
    group.add_argument("--dist-timeout-minutes", type=int, default=10)
    return parser


def parse(argv=None):
    return add_dist_args(argparse.ArgumentParser()).parse_args(argv)
