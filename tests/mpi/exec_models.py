"""Small zoo models the executor tests run (``--model tests.mpi.exec_models:mlp`` from the repository root)."""

from tensoropt_py.graph import zoo


def mlp():
    return zoo.mlp(batch=8, sizes=(12, 16, 6))


def transformer():
    return zoo.small_transformer(batch=2, seq_len=8, hidden=16, heads=2, layers=1, vocab=32)


def cnn():
    return zoo.small_cnn(batch=4, image_size=12)


def gpt2_module(*, batch=2, seq_len=8, vocab=32, hidden=16, heads=2, layers=1):
    """A tiny HuggingFace GPT-2 language model returning its scalar loss, and example inputs.

    Built from a ``GPT2Config`` (random weights, nothing downloaded), dropout off, in ``eval()``
    mode. The loss is HuggingFace's own causal-LM loss (labels shifted inside the model, the
    last position of each sequence ignored).

    Returns
    -------
    (torch.nn.Module, tuple of Tensor)
        The module and its example inputs ``(input_ids, labels)``, both ``[batch, seq_len]``
        (a ``(module, example_inputs)`` pair, as ``--model tests.mpi.exec_models:gpt2_module``
        accepts).
    """
    import torch
    import transformers

    class GPT2Loss(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, labels):
            return self.model(input_ids=input_ids, labels=labels).loss

    cfg = transformers.GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, vocab_size=vocab,
                                  n_positions=2 * seq_len, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                  use_cache=False, bos_token_id=0, eos_token_id=0)
    with torch.random.fork_rng(devices=[]):  # the weights are seeded, the caller's RNG untouched
        torch.manual_seed(0)
        module = GPT2Loss(transformers.GPT2LMHeadModel(cfg)).eval()
    gen = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, vocab, (batch, seq_len), generator=gen)
    labels = torch.randint(0, vocab, (batch, seq_len), generator=gen)
    return module, (input_ids, labels)


def gpt2():
    """The tiny GPT-2 of :func:`gpt2_module` imported with ``from_torch`` (a Graph named ``gpt2``)."""
    import warnings

    from tensoropt_py.graph.torch_import import from_torch

    module, inputs = gpt2_module()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*aten\.pad\.default.*no IR rule")  # the label shift
        return from_torch(module, inputs, name="gpt2")


MODELS = {"mlp": mlp, "transformer": transformer, "cnn": cnn, "gpt2": gpt2}
