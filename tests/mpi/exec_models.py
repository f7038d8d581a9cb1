"""Small zoo models the executor tests run (``--model tests.mpi.exec_models:mlp`` from the repository root)."""

from tensoropt_py.graph import zoo


def mlp():
    return zoo.mlp(batch=8, sizes=(12, 16, 6))


def transformer():
    return zoo.small_transformer(batch=2, seq_len=8, hidden=16, heads=2, layers=1, vocab=32)


def cnn():
    return zoo.small_cnn(batch=4, image_size=12)


MODELS = {"mlp": mlp, "transformer": transformer, "cnn": cnn}
