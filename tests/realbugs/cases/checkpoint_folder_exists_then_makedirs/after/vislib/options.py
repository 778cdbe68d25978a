import argparse
import os


def parse_args(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt-folder", dest="ckpt_folder", default="")
    ap.add_argument("--workers", type=int, default=4)
    return check_args(ap.parse_args(argv))


def check_args(args):
    assert args.workers >= 0, "workers must be >= 0"
    if args.ckpt_folder != "" and not os.path.exists(args.ckpt_folder):
        os.makedirs(args.ckpt_folder, exist_ok=True)
        assert os.path.exists(args.ckpt_folder), f"could not create {args.ckpt_folder}"
    return args
