import hydra
import lightning.pytorch as pl
from omegaconf import DictConfig

from nlpkit.models import TaggerModel


@hydra.main(config_path="conf", config_name="intent_config", version_base=None)
def main(cfg: DictConfig) -> None:
    pl.seed_everything(42)
    trainer = pl.Trainer(**cfg.trainer)
    model = TaggerModel(cfg.model, trainer=trainer)
    trainer.fit(model)


if __name__ == "__main__":
    main()
