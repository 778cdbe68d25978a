import os

import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

BATCH = 128
MICRO_BATCH = 4
ACCUM_STEPS = BATCH // MICRO_BATCH
BASE = "some-org/base-7b"

model = AutoModelForCausalLM.from_pretrained(
    BASE,
    load_in_8bit=True,
    device_map="auto",
)
tok = AutoTokenizer.from_pretrained(BASE)

trainer = transformers.Trainer(
    model=model,
    args=transformers.TrainingArguments(
        per_device_train_batch_size=MICRO_BATCH,
        gradient_accumulation_steps=ACCUM_STEPS,
        output_dir=os.environ.get("OUT", "out"),
    ),
)
trainer.train()
