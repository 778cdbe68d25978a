from typing import Dict, List

import torch
import torch.distributed as dist
from transformers import TrainerCallback

from trainkit.utils.distributed import (
    barrier,
    gather_scalar_from_all_ranks,
    get_world_size,
    is_main_process,
)


def quiz_eval_callback_factory(trainer, quiz_loader):
    class QuizEvalCallback(TrainerCallback):
        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            trainer.model.eval()
            total_loss = 0.0
            per_topic: Dict[str, Dict[str, List[int]]] = {}
            with torch.no_grad():
                for batch in quiz_loader:
                    loss, logits, _ = trainer.prediction_step(trainer.model, batch, prediction_loss_only=False)
                    total_loss += loss.item()
                    for topic, logit, answer in zip(batch["topic"], logits, batch["answer"]):
                        slot = per_topic.setdefault(topic, {"preds": [], "refs": []})
                        slot["preds"].append(int(logit[-1].argmax()))
                        slot["refs"].append(int(answer))
            barrier()
            collected: List[Dict] = [{} for _ in range(get_world_size())]
            loss_ranks = gather_scalar_from_all_ranks(lambda: total_loss, get_world_size())
            count_ranks = gather_scalar_from_all_ranks(lambda: len(quiz_loader), get_world_size())

            if not is_main_process():
                dist.gather_object(per_topic, dst=0)
            else:
                dist.gather_object(per_topic, collected, dst=0)
                results = {"quiz_loss": sum(loss_ranks) / sum(count_ranks)}
                merged: Dict[str, Dict[str, List[int]]] = {}
                for part in collected:
                    for topic, slot in part.items():
                        into = merged.setdefault(topic, {"preds": [], "refs": []})
                        into["preds"] += slot["preds"]
                        into["refs"] += slot["refs"]
                for topic, slot in merged.items():
                    hits = sum(int(p == r) for p, r in zip(slot["preds"], slot["refs"]))
                    results[f"quiz_{topic}_acc"] = hits / max(len(slot["refs"]), 1)
                trainer.log(results)
            barrier()
            trainer.model.train()
            return control

    return QuizEvalCallback
