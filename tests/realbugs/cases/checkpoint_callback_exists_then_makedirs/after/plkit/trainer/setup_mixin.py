import os

from plkit.callbacks import CheckpointCallback


class CallbackSetupMixin:
    def configure_callbacks(self):
        if self.checkpoint_callback is True:
            root = os.path.join(self.save_root, "checkpoints")
            self.checkpoint_callback = CheckpointCallback(dirpath=root)
        elif self.checkpoint_callback is False:
            self.checkpoint_callback = None
        if self.checkpoint_callback is not None:
            self.weights_dir = self.checkpoint_callback.dirpath
