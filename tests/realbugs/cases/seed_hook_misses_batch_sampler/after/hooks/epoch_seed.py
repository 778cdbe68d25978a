class Hook:
    def before_epoch(self, runner):
        pass


class ShuffleSeedHook(Hook):
    def before_epoch(self, runner):
        if hasattr(runner.loader.sampler, "set_epoch"):
            runner.loader.sampler.set_epoch(runner.epoch)
        if hasattr(runner.loader.batch_sampler.sampler, "set_epoch"):
            runner.loader.batch_sampler.sampler.set_epoch(runner.epoch)
