"""Model zoo: the TensorOpt paper's models at the paper's scale, and small models for tests.

TensorOpt (§5, Table 1 and Table 4) gives only the parameter sizes (RNN 108 GB,
WideResNet 7.3 GB, Transformer 9.7 GB, VGG16 0.52 GB, Transformer-S 4.8 GB) and the batch
size (256); it gives no layer counts or widths. The shapes below are our choice, made to
match those sizes with standard architectures. The paper's "GB" are read as GiB (2**30
bytes): VGG16's 138.4 M fp32 parameters are 0.515 GiB = "0.52" (0.553 GB). Every factory
documents the parameter count it gives; all use fp32 and build in well under a second.

Every graph starts with one INPUT operator producing the batch (and labels) and ends with a
LOSS operator; operators are at layer granularity (one linear, add, norm, attention...).

Examples
--------
>>> from tensoropt_py.graph import zoo
>>> g = zoo.vgg16()
>>> g.num_parameters
138357544
>>> round(g.parameter_bytes / 2**30, 2)
0.52
"""

from __future__ import annotations

import math

from ..errors import InvalidInputError
from .builder import GraphBuilder
from .ir import Graph

__all__ = [
    "PAPER_PARAMETER_GIB",
    "PAPER_MEMORY_GIB",
    "mlp",
    "small_cnn",
    "small_transformer",
    "rnn",
    "wide_resnet",
    "vgg16",
    "transformer",
    "transformer_s",
    "bert_large",
    "gpt2",
    "GPT2_SIZES",
]

#: TensorOpt Table 1 / Table 4 parameter sizes ("GB", read as GiB).
PAPER_PARAMETER_GIB = {"rnn": 108.0, "wide_resnet": 7.3, "transformer": 9.7, "vgg16": 0.52, "transformer_s": 4.8}
#: TensorOpt Table 1 "Memory (GB)": estimated single-GPU peak memory of training.
PAPER_MEMORY_GIB = {"rnn": 126.0, "wide_resnet": 83.0, "transformer": 74.0, "vgg16": 30.0}

#: GPT-2 sizes: (layers, hidden, heads).
GPT2_SIZES = {"small": (12, 768, 12), "medium": (24, 1024, 16), "large": (36, 1280, 20), "xl": (48, 1600, 25)}


def _positive(**kw):
    for k, v in kw.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise InvalidInputError(f"{k} must be a positive int, got {v!r}")


# ----------------------------------------------------------------------------------------------
# small models
# ----------------------------------------------------------------------------------------------
def mlp(batch: int = 32, sizes=(784, 256, 10), *, name: str = "mlp") -> Graph:
    """A multi-layer perceptron: ``linear -> relu`` per hidden layer, a final linear, cross-entropy.

    Parameters: ``sum(sizes[i] * sizes[i+1] + sizes[i+1])``.

    Examples
    --------
    >>> mlp(batch=4, sizes=(8, 4)).num_parameters
    36
    """
    _positive(batch=batch)
    if len(sizes) < 2:
        raise InvalidInputError(f"mlp needs at least two sizes, got {sizes!r}")
    gb = GraphBuilder(name)
    x, y = gb.input([("x", (batch, sizes[0]), "float32"), ("labels", (batch,), "int64")])
    h = x
    for i, n in enumerate(sizes[1:]):
        h = gb.linear(h, n, name=f"fc{i}")
        if i < len(sizes) - 2:
            h = gb.relu(h, name=f"relu{i}")
    gb.loss(h, y)
    return gb.build()


def small_cnn(batch: int = 8, *, channels: int = 1, image_size: int = 28, num_classes: int = 10, name="small_cnn") -> Graph:
    """LeNet-5-like CNN: conv5x5(6, pad 2) relu maxpool2, conv5x5(16) relu maxpool2, fc120 relu fc84 relu fc.

    With the defaults (1x28x28 images, 10 classes): 61,706 parameters.

    Examples
    --------
    >>> small_cnn().num_parameters
    61706
    """
    _positive(batch=batch, channels=channels, image_size=image_size, num_classes=num_classes)
    gb = GraphBuilder(name)
    x, y = gb.input([("x", (batch, channels, image_size, image_size), "float32"), ("labels", (batch,), "int64")])
    h = gb.max_pool2d(gb.relu(gb.conv2d(x, 6, 5, padding=2, name="conv1")), 2, name="pool1")
    h = gb.max_pool2d(gb.relu(gb.conv2d(h, 16, 5, name="conv2")), 2, name="pool2")
    h = gb.flatten(h)
    h = gb.relu(gb.linear(h, 120, name="fc1"))
    h = gb.relu(gb.linear(h, 84, name="fc2"))
    gb.loss(gb.linear(h, num_classes, name="fc3"), y)
    return gb.build()


# ----------------------------------------------------------------------------------------------
# transformer building blocks
# ----------------------------------------------------------------------------------------------
def _heads(gb, t, heads):
    B, S, D = gb.shape(t)
    return gb.transpose(gb.reshape(t, (B, S, heads, D // heads)), (0, 2, 1, 3))


def _mha(gb, xq, xkv, heads, *, causal=False, attn_dropout=0.0, name="attn"):
    """Multi-head attention: q/k/v linears, split heads, fused attention, merge heads, out linear."""
    B, S, D = gb.shape(xq)
    if D % heads:
        raise InvalidInputError(f"hidden size {D} is not divisible by {heads} heads")
    with gb.scope(name):
        q = _heads(gb, gb.linear(xq, D, name="q"), heads)
        k = _heads(gb, gb.linear(xkv, D, name="k"), heads)
        v = _heads(gb, gb.linear(xkv, D, name="v"), heads)
        o = gb.attention(q, k, v, causal=causal, dropout_p=attn_dropout, scale=1.0 / math.sqrt(D // heads))
        o = gb.reshape(gb.transpose(o, (0, 2, 1, 3)), (B, S, D))
        return gb.linear(o, D, name="out")


def _drop(gb, x, p, name="dropout"):
    return gb.dropout(x, p, name=name) if p > 0 else x


def _ffn(gb, x, ffn, act, dropout, name="mlp"):
    D = gb.shape(x)[-1]
    with gb.scope(name):
        h = gb.linear(x, ffn, name="fc1")
        h = gb.unary(h, act, name=act)
        h = _drop(gb, h, dropout) if act == "relu" else h
        return gb.linear(h, D, name="fc2")


def _pre_ln_block(gb, x, heads, ffn, dropout, *, causal=True, act="gelu", eps=1e-5):
    """GPT-2 block: ``x + attn(ln1(x))``, ``x + mlp(ln2(x))`` with residual dropout."""
    h = gb.layer_norm(x, eps=eps, name="ln1")
    h = _drop(gb, _mha(gb, h, h, heads, causal=causal, attn_dropout=dropout), dropout, "attn_dropout")
    x = gb.add(x, h, name="residual1")
    h = gb.layer_norm(x, eps=eps, name="ln2")
    h = _drop(gb, _ffn(gb, h, ffn, act, 0.0), dropout, "mlp_dropout")
    return gb.add(x, h, name="residual2")


def _post_ln_block(gb, x, heads, ffn, dropout, *, act="gelu", eps=1e-5, memory=None):
    """BERT / original-Transformer block: ``ln(x + drop(attn(x)))`` [+ cross attention] ``ln(x + drop(ffn(x)))``."""
    h = _drop(gb, _mha(gb, x, x, heads, causal=memory is not None, attn_dropout=dropout), dropout, "attn_dropout")
    x = gb.layer_norm(gb.add(x, h, name="residual1"), eps=eps, name="ln1")
    if memory is not None:
        h = _drop(gb, _mha(gb, x, memory, heads, attn_dropout=dropout, name="cross_attn"), dropout, "cross_dropout")
        x = gb.layer_norm(gb.add(x, h, name="residual_cross"), eps=eps, name="ln_cross")
    h = _drop(gb, _ffn(gb, x, ffn, act, dropout if act == "relu" else 0.0), dropout, "mlp_dropout")
    return gb.layer_norm(gb.add(x, h, name="residual2"), eps=eps, name="ln2")


def _decoder_lm(gb, *, batch, seq_len, vocab, positions, layers, hidden, heads, ffn, dropout, eps=1e-5):
    """GPT-style decoder-only LM with learned positions and a tied LM head."""
    ids, labels = gb.input([("input_ids", (batch, seq_len), "int64"), ("labels", (batch, seq_len), "int64")])
    if seq_len > positions:
        raise InvalidInputError(f"seq_len {seq_len} exceeds the {positions} learned positions")
    wte = gb.parameter("wte.weight", (vocab, hidden))
    wpe = gb.parameter("wpe.weight", (positions, hidden))
    pos = gb.constant("position_ids", (seq_len,), "int64")
    x = gb.add(gb.embedding(ids, weight=wte, name="wte"), gb.embedding(pos, weight=wpe, name="wpe"), name="embed")
    x = _drop(gb, x, dropout, "embed_dropout")
    for i in range(layers):
        with gb.scope(f"h{i}"):
            x = _pre_ln_block(gb, x, heads, ffn, dropout, eps=eps)
    x = gb.layer_norm(x, eps=eps, name="ln_f")
    logits = gb.linear(x, weight=wte, bias=False, name="lm_head")
    gb.loss(logits, labels)
    return gb.build()


def small_transformer(
    batch: int = 4,
    seq_len: int = 16,
    *,
    hidden: int = 32,
    heads: int = 4,
    layers: int = 2,
    vocab: int = 100,
    ffn: int | None = None,
    dropout: float = 0.0,
    name: str = "small_transformer",
) -> Graph:
    """A tiny GPT-style decoder (pre-LN, causal, tied LM head) for tests and CPU execution.

    Parameters: ``(vocab + seq_len) D + layers (4 D^2 + 4 D + 2 D F + F + D + 4 D) + 2 D``
    (``F = ffn``, default ``4 D``); the defaults give 29,184.

    Examples
    --------
    >>> small_transformer().num_parameters
    29184
    """
    _positive(batch=batch, seq_len=seq_len, hidden=hidden, heads=heads, layers=layers, vocab=vocab)
    gb = GraphBuilder(name)
    return _decoder_lm(gb, batch=batch, seq_len=seq_len, vocab=vocab, positions=seq_len, layers=layers,
                       hidden=hidden, heads=heads, ffn=ffn or 4 * hidden, dropout=dropout)


def gpt2(size: str = "small", batch: int = 8, seq_len: int = 1024, *, dropout: float = 0.1, vocab: int = 50257,
         positions: int = 1024) -> Graph:
    """GPT-2 (Radford et al. 2019) with a tied LM head, as Hugging Face's ``GPT2LMHeadModel``.

    Sizes (layers, hidden, heads): small (12, 768, 12) 124,439,808 parameters; medium
    (24, 1024, 16) 354,823,168; large (36, 1280, 20) 774,030,080; xl (48, 1600, 25)
    1,557,611,200. Batch 8 x 1024 tokens by default (not from the paper). The fused ``c_attn``
    is built as three linears (same parameter count).

    Examples
    --------
    >>> gpt2("small", batch=1, seq_len=8).num_parameters
    124439808
    """
    if size not in GPT2_SIZES:
        raise InvalidInputError(f"unknown GPT-2 size {size!r}; known: {', '.join(GPT2_SIZES)}")
    _positive(batch=batch, seq_len=seq_len)
    layers, hidden, heads = GPT2_SIZES[size]
    gb = GraphBuilder(f"gpt2-{size}")
    return _decoder_lm(gb, batch=batch, seq_len=seq_len, vocab=vocab, positions=positions, layers=layers,
                       hidden=hidden, heads=heads, ffn=4 * hidden, dropout=dropout)


def bert_large(batch: int = 32, seq_len: int = 512, *, layers: int = 24, hidden: int = 1024, heads: int = 16,
               vocab: int = 30522, positions: int = 512, dropout: float = 0.1) -> Graph:
    """BERT-large with the masked-LM head (Hugging Face ``BertForMaskedLM``, no pooler).

    24 layers, hidden 1024, 16 heads, FFN 4096, vocabulary 30522, 512 positions, 2 token
    types: 335,174,458 parameters. The decoder of the MLM head is tied to the word
    embeddings (its bias is a parameter). Batch 32 x 512 tokens by default (not from the paper).

    Examples
    --------
    >>> bert_large(batch=1, seq_len=8).num_parameters
    335174458
    """
    _positive(batch=batch, seq_len=seq_len, layers=layers, hidden=hidden, heads=heads, vocab=vocab)
    gb = GraphBuilder("bert-large")
    ids, types, labels = gb.input([("input_ids", (batch, seq_len), "int64"), ("token_type_ids", (batch, seq_len), "int64"),
                                   ("labels", (batch, seq_len), "int64")])
    wte = gb.parameter("embeddings.word_embeddings.weight", (vocab, hidden))
    pos = gb.constant("position_ids", (seq_len,), "int64")
    x = gb.embedding(ids, weight=wte, name="embeddings.word")
    x = gb.add(x, gb.embedding(types, 2, hidden, name="embeddings.token_type"), name="embeddings.add_type")
    x = gb.add(x, gb.embedding(pos, positions, hidden, name="embeddings.position"), name="embeddings.add_pos")
    x = _drop(gb, gb.layer_norm(x, eps=1e-12, name="embeddings.ln"), dropout, "embeddings.dropout")
    for i in range(layers):
        with gb.scope(f"layer{i}"):
            x = _post_ln_block(gb, x, heads, 4 * hidden, dropout, eps=1e-12)
    with gb.scope("cls"):
        h = gb.gelu(gb.linear(x, hidden, name="transform"))
        h = gb.layer_norm(h, eps=1e-12, name="ln")
        logits = gb.linear(h, weight=wte, bias=True, name="decoder")
    gb.loss(logits, labels)
    return gb.build()


def transformer(batch: int = 256, src_len: int = 32, tgt_len: int = 32, *, hidden: int = 3840, heads: int | None = None,
                layers: int = 6, ffn: int | None = None, vocab: int = 37000, dropout: float = 0.1,
                name: str = "transformer") -> Graph:
    """The encoder-decoder Transformer of Vaswani et al. (post-LN, ReLU FFN, sinusoidal
    positions, one shared source/target/output embedding), widened to TensorOpt's 9.7 GB.

    Defaults: 6 encoder + 6 decoder layers, hidden 3840, 30 heads of 128, FFN 4 x hidden,
    shared vocabulary 37,000, batch 256 x 32 source and 32 target tokens: 2,620,078,080
    parameters = 9.76 GiB (paper: 9.7). ``hidden`` scales the model (TensorOpt Fig. 7a).
    Parameters: ``V D + L (12 D^2 + 13 D) + L (16 D^2 + 19 D)`` with ``FFN = 4 D``.

    Examples
    --------
    >>> transformer(batch=2, src_len=4, tgt_len=4, hidden=64, heads=4, layers=1, vocab=50).num_parameters
    119936
    """
    _positive(batch=batch, src_len=src_len, tgt_len=tgt_len, hidden=hidden, layers=layers, vocab=vocab)
    heads = heads or max(1, hidden // 128)
    ffn = ffn or 4 * hidden
    gb = GraphBuilder(name)
    src, tgt, labels = gb.input([("src_ids", (batch, src_len), "int64"), ("tgt_ids", (batch, tgt_len), "int64"),
                                 ("labels", (batch, tgt_len), "int64")])
    emb = gb.parameter("shared_embedding.weight", (vocab, hidden))
    scale = math.sqrt(hidden)

    def embed(ids, n, tag):
        x = gb.unary(gb.embedding(ids, weight=emb, name=f"{tag}.embed"), "mul_scalar", scalar=scale, name=f"{tag}.scale")
        pe = gb.constant(f"{tag}.positional_encoding", (n, hidden))
        return _drop(gb, gb.add(x, pe, name=f"{tag}.add_pos"), dropout, f"{tag}.dropout")

    x = embed(src, src_len, "encoder")
    for i in range(layers):
        with gb.scope(f"encoder{i}"):
            x = _post_ln_block(gb, x, heads, ffn, dropout, act="relu")
    memory = x
    y = embed(tgt, tgt_len, "decoder")
    for i in range(layers):
        with gb.scope(f"decoder{i}"):
            y = _post_ln_block(gb, y, heads, ffn, dropout, act="relu", memory=memory)
    logits = gb.linear(y, weight=emb, bias=False, name="generator")
    gb.loss(logits, labels)
    return gb.build()


def transformer_s(batch: int = 256, src_len: int = 32, tgt_len: int = 32, **kw) -> Graph:
    """Transformer-S of TensorOpt Table 4 (4.8 GB): :func:`transformer` with hidden 2688 (21 heads).

    1,313,829,888 parameters = 4.89 GiB (paper: 4.8).

    Examples
    --------
    >>> transformer_s(batch=1, src_len=2, tgt_len=2).num_parameters
    1313829888
    """
    kw.setdefault("hidden", 2688)
    kw.setdefault("name", "transformer_s")
    return transformer(batch, src_len, tgt_len, **kw)


# ----------------------------------------------------------------------------------------------
# CNNs
# ----------------------------------------------------------------------------------------------
_VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


def vgg16(batch: int = 256, *, image_size: int = 224, num_classes: int = 1000, dropout: float = 0.5) -> Graph:
    """VGG16 (Simonyan & Zisserman, configuration D) on 224x224 images, batch 256.

    13 conv3x3+ReLU, 5 max-pools, FC 4096-4096-classes with dropout: 138,357,544 parameters
    = 0.515 GiB (paper: 0.52).
    """
    _positive(batch=batch, image_size=image_size, num_classes=num_classes)
    gb = GraphBuilder("vgg16")
    x, y = gb.input([("images", (batch, 3, image_size, image_size), "float32"), ("labels", (batch,), "int64")])
    h, c = x, 0
    for v in _VGG16:
        if v == "M":
            h = gb.max_pool2d(h, 2, name="pool")
        else:
            c += 1
            h = gb.relu(gb.conv2d(h, v, 3, padding=1, name=f"conv{c}"), name=f"relu{c}")
    if image_size != 224:
        h = gb.avg_pool2d(h, output_size=(7, 7), name="avgpool") if gb.shape(h)[2] % 7 == 0 else h
    h = gb.flatten(h)
    h = _drop(gb, gb.relu(gb.linear(h, 4096, name="fc6")), dropout, "drop6")
    h = _drop(gb, gb.relu(gb.linear(h, 4096, name="fc7")), dropout, "drop7")
    gb.loss(gb.linear(h, num_classes, name="fc8"), y)
    return gb.build()


_RESNET_BLOCKS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}


def wide_resnet(batch: int = 256, *, depth: int = 50, width: int = 9, image_size: int = 224,
                num_classes: int = 1000, base: int = 64) -> Graph:
    """Wide ResNet: the bottleneck ResNet (``depth`` 50/101/152) with *every* channel count
    multiplied by ``width`` (the ToFu-style widening), on ImageNet-size images, batch 256.

    Defaults (depth 50, width 9): 1,918,081,576 parameters = 7.14 GiB (paper: 7.3). Stem
    conv7x7/2 + BN + ReLU + maxpool3x3/2; stages of ``[1x1, 3x3 (stride), 1x1 x4]`` bottlenecks
    with BN after every conv and a projection shortcut (conv1x1 + BN) in each stage's first
    block; global average pooling and a linear classifier. ``base`` (64) is the stem width
    before widening (small values give test-size networks).
    """
    if depth not in _RESNET_BLOCKS:
        raise InvalidInputError(f"wide_resnet depth must be one of {sorted(_RESNET_BLOCKS)}, got {depth!r}")
    _positive(batch=batch, width=width, image_size=image_size, num_classes=num_classes, base=base)
    gb = GraphBuilder(f"wide_resnet{depth}_{width}")
    x, y = gb.input([("images", (batch, 3, image_size, image_size), "float32"), ("labels", (batch,), "int64")])

    def cbr(h, c, k, s, p, relu=True, name="conv"):
        h = gb.batch_norm(gb.conv2d(h, c, k, stride=s, padding=p, bias=False, name=name), name=f"{name}.bn")
        return gb.relu(h, name=f"{name}.relu") if relu else h

    h = cbr(x, base * width, 7, 2, 3, name="stem")
    h = gb.max_pool2d(h, 3, 2, 1, name="stem.pool")
    for s, n in enumerate(_RESNET_BLOCKS[depth]):
        planes = base * 2**s * width
        for b in range(n):
            stride = 2 if (b == 0 and s > 0) else 1
            with gb.scope(f"layer{s + 1}.{b}"):
                o = cbr(h, planes, 1, 1, 0, name="conv1")
                o = cbr(o, planes, 3, stride, 1, name="conv2")
                o = cbr(o, 4 * planes, 1, 1, 0, relu=False, name="conv3")
                sc = cbr(h, 4 * planes, 1, stride, 0, relu=False, name="downsample") if b == 0 else h
                h = gb.relu(gb.add(o, sc, name="residual"), name="relu")
    h = gb.avg_pool2d(h, output_size=1, name="avgpool")
    h = gb.flatten(h)
    gb.loss(gb.linear(h, num_classes, name="fc"), y)
    return gb.build()


# ----------------------------------------------------------------------------------------------
# RNN
# ----------------------------------------------------------------------------------------------
def rnn(batch: int = 256, seq_len: int = 20, *, layers: int = 8, hidden: int = 20992, vocab: int = 10000,
        name: str = "rnn") -> Graph:
    """A stacked-LSTM language model (PTB-style, vocabulary 10,000) unrolled over ``seq_len`` steps.

    Embedding ``[V, H]``, ``layers`` LSTM layers of ``hidden`` units (one RNN_CELL operator per
    layer and time step, sharing the layer's weights over time), an output linear ``H -> V``
    applied to the stacked last-layer states, cross-entropy. Parameters:
    ``V H + layers (8 H^2 + 4 H) + H V + V``. Defaults (8 x 20992, 20 steps, batch 256):
    28,623,021,840 parameters = 106.6 GiB (paper: 108).

    Examples
    --------
    >>> g = rnn(batch=2, seq_len=3, layers=2, hidden=8, vocab=10)
    >>> g.num_parameters == 10 * 8 + 2 * (8 * 8 * 8 + 4 * 8) + 8 * 10 + 10
    True
    >>> g.kinds()["rnn_cell"]
    6
    """
    _positive(batch=batch, seq_len=seq_len, layers=layers, hidden=hidden, vocab=vocab)
    gb = GraphBuilder(name)
    ids, labels = gb.input([("input_ids", (batch, seq_len), "int64"), ("labels", (batch, seq_len), "int64")])
    x = gb.embedding(ids, vocab, hidden, name="embedding")
    steps = gb.split(x, 1, dim=1, name="unbind") if seq_len > 1 else (x,)
    xs = [gb.reshape(s, (batch, hidden), name="step") for s in steps]
    for layer in range(layers):
        with gb.scope(f"lstm{layer}"):
            w = (gb.parameter("weight_ih", (4, hidden, hidden)), gb.parameter("weight_hh", (4, hidden, hidden)),
                 gb.parameter("bias", (4, hidden)))
            h = c = None
            outs = []
            for t in range(seq_len):
                h, c = gb.rnn_cell(xs[t], h, c, weights=w, name=f"t{t}")
                outs.append(h)
            xs = outs
    stacked = [gb.reshape(h, (batch, 1, hidden), name="unsqueeze") for h in xs]
    y = gb.concat(stacked, dim=1, name="stack") if seq_len > 1 else stacked[0]
    logits = gb.linear(y, vocab, name="decoder")
    gb.loss(logits, labels)
    return gb.build()
