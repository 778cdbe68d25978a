import os

from accelerate import Accelerator


class PolicyTrainer:
    def __init__(self, model, tokenizer, optimizer):
        self.accelerator = Accelerator()
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.tokenizer = tokenizer

    def step(self, batch):
        loss = self.model(**batch).loss
        self.accelerator.backward(loss)
        self.optimizer.step()
        self.optimizer.zero_grad()
        return loss.detach()

    def write_card(self, out_dir):
        with open(os.path.join(out_dir, "README.md"), "w") as fh:
            fh.write("policy model\n")

    def save_pretrained(self, out_dir):
        self.accelerator.unwrap_model(self.model).save_pretrained(out_dir)
        self.tokenizer.save_pretrained(out_dir)
        self.write_card(out_dir)
