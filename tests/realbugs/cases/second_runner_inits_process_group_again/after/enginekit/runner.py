import torch.distributed as dist

from enginekit.dist import init_dist


def is_distributed():
    return dist.is_available() and dist.is_initialized()


class Runner:
    def __init__(self, model, launcher="none", env_cfg=None):
        env_cfg = env_cfg or {}
        self.model = model
        self.launcher = launcher
        self.distributed = launcher != "none"
        self.setup_env(env_cfg)

    def setup_env(self, env_cfg):
        # init distributed env first, since logger depends on the dist info.
        if self.distributed and not is_distributed():
            init_dist(self.launcher, **env_cfg.get("dist_cfg", {}))
        self.rank = dist.get_rank() if self.distributed else 0
