class Hook:
    def before_epoch(self, runner):
        pass


class ShuffleSeedHook(Hook):
    def before_epoch(self, runner):
        runner.loader.sampler.set_epoch(runner.epoch)
