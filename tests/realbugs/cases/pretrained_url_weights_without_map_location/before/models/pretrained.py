import logging

from torch.utils import model_zoo


def load_pretrained_weights(model, cfg, in_chans=3, strict=True):
    if not cfg.get("url"):
        logging.warning("no pretrained url, keeping random init")
        return
    state = model_zoo.load_url(cfg["url"], progress=False)
    if in_chans == 1:
        key = cfg["first_conv"] + ".weight"
        state[key] = state[key].sum(dim=1, keepdim=True)
    model.load_state_dict(state, strict=strict)
