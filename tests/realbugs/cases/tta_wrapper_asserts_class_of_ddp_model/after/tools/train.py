from engine import StandardTrainer
from modeling import DetectorWithAugment


class Trainer(StandardTrainer):
    @classmethod
    def evaluate_with_augment(cls, cfg, model):
        model = DetectorWithAugment(cfg, model)
        return cls.evaluate(cfg, model)


def main(cfg):
    trainer = Trainer(cfg)
    trainer.run_step()
    return trainer.evaluate_with_augment(cfg, trainer.model)


if __name__ == "__main__":
    main({})
