# Configuration defaults for the hierarchical vision transformer recipes.
import os

import yaml
from yacs.config import CfgNode as CN

_C = CN()
_C.BASE = ['']
_C.DATA = CN()
_C.DATA.BATCH_SIZE = 128
_C.DATA.PATH = ''
_C.MODEL = CN()
_C.MODEL.NAME = 'hvt_tiny'
_C.TRAIN = CN()
_C.TRAIN.EPOCHS = 300
_C.TRAIN.BASE_LR = 5e-4
_C.OUTPUT = ''
_C.TAG = 'default'
_C.SEED = 0
# the GPU of this process on its node
_C.LOCAL_RANK = 0


def _merge_file(config, cfg_file):
    config.defrost()
    with open(cfg_file, 'r') as f:
        loaded = yaml.load(f, Loader=yaml.FullLoader)
    for base in loaded.setdefault('BASE', ['']):
        if base:
            _merge_file(config, os.path.join(os.path.dirname(cfg_file), base))
    config.merge_from_file(cfg_file)
    config.freeze()


def update_config(config, args):
    _merge_file(config, args.cfg)
    config.defrost()
    if args.batch_size:
        config.DATA.BATCH_SIZE = args.batch_size
    if args.data_path:
        config.DATA.PATH = args.data_path

    # the GPU this process drives
    config.LOCAL_RANK = args.local_rank

    config.OUTPUT = os.path.join(config.OUTPUT, config.MODEL.NAME, config.TAG)
    config.freeze()


def get_config(args):
    config = _C.clone()
    update_config(config, args)
    return config
