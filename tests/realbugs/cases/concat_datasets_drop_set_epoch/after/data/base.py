class EpochAware:
    def set_epoch(self, epoch):
        self.epoch = epoch
