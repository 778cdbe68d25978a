from cli.dist_utils import dist_setup, get_rank
from cli.env import set_seed


def main(config, init_distributed=False):
    if init_distributed:
        dist_setup(config)

    config["seed"] = set_seed(config["seed"])
    print(f"seed {config['seed']}")
    return config


def run(config):
    return main(config, init_distributed=config.get("world_size", 1) > 1)
