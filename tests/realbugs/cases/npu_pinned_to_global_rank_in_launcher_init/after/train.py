import torch

from launch.dist_setup import setup


def main():
    setup("pytorch")
    model = torch.nn.Linear(4, 4)
    return model


if __name__ == "__main__":
    main()
