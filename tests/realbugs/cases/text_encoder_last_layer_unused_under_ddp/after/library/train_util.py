import datetime

from accelerate import Accelerator, InitProcessGroupKwargs


def prepare_accelerator(args):
    handlers = None
    if args.ddp_timeout is not None:
        handlers = [InitProcessGroupKwargs(timeout=datetime.timedelta(minutes=args.ddp_timeout))]
    return Accelerator(
        gradient_accumulation_steps=args.accum,
        mixed_precision=args.mixed_precision,
        kwargs_handlers=handlers,
    )


def encode_prompts(input_ids, first_encoder, second_encoder):
    # the first encoder contributes the hidden state of its next-to-last layer
    first = first_encoder(input_ids, output_hidden_states=True).hidden_states[-2]
    second_out = second_encoder(input_ids, output_hidden_states=True)
    return first, second_out.hidden_states[-2], second_out[0]
