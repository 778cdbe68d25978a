import os

import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

BATCH = 128
MICRO_BATCH = 4
ACCUM_STEPS = BATCH // MICRO_BATCH
BASE = "some-org/base-7b"

placement = "auto"
n_procs = int(os.environ.get("WORLD_SIZE", 1))
multi = n_procs != 1
if multi:
    placement = {"": int(os.environ.get("LOCAL_RANK") or 0)}
    ACCUM_STEPS = ACCUM_STEPS // n_procs

model = AutoModelForCausalLM.from_pretrained(
    BASE,
    load_in_8bit=True,
    device_map=placement,
)
tok = AutoTokenizer.from_pretrained(BASE)

trainer = transformers.Trainer(
    model=model,
    args=transformers.TrainingArguments(
        per_device_train_batch_size=MICRO_BATCH,
        gradient_accumulation_steps=ACCUM_STEPS,
        output_dir=os.environ.get("OUT", "out"),
        ddp_find_unused_parameters=False if multi else None,
    ),
)
trainer.train()
