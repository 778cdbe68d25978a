import argparse


class Flags:
    def __init__(self):
        self.parser = argparse.ArgumentParser()
        self.parser.add_argument("--config", type=str, default=None, help="config file")
        # torch.distributed.launch passes --local_rank to every process
        self.parser.add_argument("--local_rank", type=int, default=None, help="local rank")
        self.parser.add_argument("opts", default=None, nargs=argparse.REMAINDER,
                                 help="overrides")

    def get_parser(self):
        return self.parser


flags = Flags()
