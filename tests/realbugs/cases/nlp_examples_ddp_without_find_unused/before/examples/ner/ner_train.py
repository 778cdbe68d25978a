import hydra
import lightning.pytorch as pl
from omegaconf import DictConfig

from nlpkit.models import TaggerModel
from nlpkit.strategies import TextDDPStrategy


@hydra.main(config_path="conf", config_name="ner_config", version_base=None)
def main(cfg: DictConfig) -> None:
    try:
        strategy = TextDDPStrategy()
    except (ImportError, ModuleNotFoundError):
        strategy = None
    trainer = pl.Trainer(strategy=strategy, **cfg.trainer)
    model = TaggerModel(cfg.model, trainer=trainer)
    trainer.fit(model)


if __name__ == "__main__":
    main()
