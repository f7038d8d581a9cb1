"""The public model zoo (``to.models``): re-exports :mod:`tensoropt_py.graph.zoo`.

Examples
--------
>>> from tensoropt_py import models
>>> models.mlp(batch=2, sizes=(4, 2)).num_parameters
10
"""

from .graph.zoo import (
    GPT2_SIZES,
    PAPER_MEMORY_GIB,
    PAPER_PARAMETER_GIB,
    bert_large,
    gpt2,
    mlp,
    rnn,
    small_cnn,
    small_transformer,
    transformer,
    transformer_s,
    vgg16,
    wide_resnet,
)

__all__ = [
    "rnn",
    "wide_resnet",
    "transformer",
    "vgg16",
    "transformer_s",
    "bert_large",
    "gpt2",
    "mlp",
    "small_cnn",
    "small_transformer",
    "GPT2_SIZES",
    "PAPER_PARAMETER_GIB",
    "PAPER_MEMORY_GIB",
]
