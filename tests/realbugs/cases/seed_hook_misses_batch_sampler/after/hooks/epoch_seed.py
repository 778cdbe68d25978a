class Hook:
    def before_epoch(self, runner):
        pass


class ShuffleSeedHook(Hook):
    def before_epoch(self, runner):
        if hasattr(runner.data_loader.sampler, "set_epoch"):
            runner.data_loader.sampler.set_epoch(runner.epoch)
        if hasattr(runner.data_loader.batch_sampler.sampler, "set_epoch"):
            runner.data_loader.batch_sampler.sampler.set_epoch(runner.epoch)
