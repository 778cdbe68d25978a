from textgen.comm import send_floats


def beam_search_and_post_process(model, prompts=None, tokens_to_generate=0, beam_size=0,
                                 add_bos=False, stop_token=50256, num_return=1, length_penalty=1.0):
    values = [tokens_to_generate,
              beam_size,
              add_bos,
              stop_token,
              num_return,
              length_penalty]
    received = send_floats(3, floats=values)
    tokens_to_generate = int(received[0].item())
    beam_size = int(received[1].item())
    add_bos = bool(received[2].item())
    stop_token = int(received[3].item())
    num_return = int(received[4].item())
    length_penalty = received[5].item()
    return model.beam(prompts, tokens_to_generate, beam_size, add_bos, stop_token, num_return, length_penalty)
