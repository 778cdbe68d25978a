def _call_setup_hook(trainer):
    fn = trainer.state.fn
    for module in trainer.lightning_module.modules():
        if hasattr(module, "_device"):
            module._device = trainer.strategy.root_device

    trainer.strategy.barrier("pre_setup")

    # create the loggers' experiments so their version folders exist
    for logger in trainer.loggers:
        if hasattr(logger, "experiment"):
            _ = logger.experiment

    if trainer.datamodule is not None:
        trainer.datamodule.setup(stage=fn)
    trainer.lightning_module.setup(stage=fn)
    trainer.strategy.barrier("post_setup")
