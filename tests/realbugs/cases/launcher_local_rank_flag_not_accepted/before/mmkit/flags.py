import argparse


class Flags:
    def __init__(self):
        self.parser = argparse.ArgumentParser()
        self.parser.add_argument("--config", type=str, default=None, help="config file")
        self.parser.add_argument("opts", default=None, nargs=argparse.REMAINDER,
                                 help="overrides")

    def get_parser(self):
        return self.parser


flags = Flags()
