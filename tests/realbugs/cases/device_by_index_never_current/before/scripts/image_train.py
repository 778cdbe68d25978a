"""
Train a toy denoiser on random images.
"""

import torch as th

from diffusion_kit import dist_util
from diffusion_kit.train_util import TrainLoop


def random_batches(batch_size=8):
    while True:
        yield th.randn(batch_size, 3 * 32 * 32)


def main():
    dist_util.setup_dist()
    model = th.nn.Linear(3 * 32 * 32, 3 * 32 * 32)
    model.to(dist_util.dev())
    TrainLoop(model=model, data=random_batches()).run_loop()


if __name__ == "__main__":
    main()
