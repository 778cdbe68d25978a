import os

from transformers import TrainerCallback

from ..extras import logging


class DashboardCallback(TrainerCallback):
    def __init__(self) -> None:
        self.handler = None
        if os.getenv("DASHBOARD_DIR"):
            self.handler = logging.FileEchoHandler(os.getenv("DASHBOARD_DIR"))
            logging.get_logger("tuner").addHandler(self.handler)

    def on_train_end(self, args, state, control, **kwargs):
        if self.handler is not None:
            self.handler.close()
