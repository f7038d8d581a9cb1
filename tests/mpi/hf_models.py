"""Tiny Hugging Face models of many architectures, built from configs (random weights, nothing
downloaded), for the import tests (tests/test_hf_models.py) and the executor runs under MPI
(``--model hf_models:llama`` from tests/mpi on the path).

Every factory returns ``(module, example_inputs)``: the module returns the model's own training
loss (``labels`` given), dropout off, in ``eval()`` mode; ``example_inputs`` is a dict of keyword
inputs. Sizes: 2 layers, hidden 32, 4 heads, vocabulary 64, batch 2, sequence 8 (ViT: 16x16
images of 4x4 patches).
"""

import torch

V, B, S = 64, 2, 8
HIDDEN, HEADS, FFN, LAYERS = 32, 4, 64, 2


class LossOf(torch.nn.Module):
    """Calls a Hugging Face model with keyword inputs and returns its ``.loss``."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, **inputs):
        return self.model(**inputs).loss


def _decoder_cfg(**kw):
    base = dict(num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS, intermediate_size=FFN,
                vocab_size=V, max_position_embeddings=64, use_cache=False, attention_dropout=0.0,
                bos_token_id=0, eos_token_id=1, pad_token_id=0)
    base.update(kw)
    return base


def _encoder_cfg(**kw):
    base = dict(num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS, intermediate_size=FFN,
                vocab_size=V, max_position_embeddings=64, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0, pad_token_id=1)
    base.update(kw)
    return base


def _factories():
    import transformers as T

    return {
        "gpt2": lambda: T.GPT2LMHeadModel(T.GPT2Config(
            n_layer=LAYERS, n_embd=HIDDEN, n_head=HEADS, vocab_size=V, n_positions=64, use_cache=False,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=1)),
        "llama": lambda: T.LlamaForCausalLM(T.LlamaConfig(**_decoder_cfg(num_key_value_heads=2))),
        "qwen2": lambda: T.Qwen2ForCausalLM(T.Qwen2Config(**_decoder_cfg(num_key_value_heads=2))),
        "mistral": lambda: T.MistralForCausalLM(T.MistralConfig(**_decoder_cfg(num_key_value_heads=2))),
        "gemma": lambda: T.GemmaForCausalLM(T.GemmaConfig(**_decoder_cfg(num_key_value_heads=2, head_dim=8))),
        "gpt_neox": lambda: T.GPTNeoXForCausalLM(T.GPTNeoXConfig(**_decoder_cfg(hidden_dropout=0.0))),
        "phi3": lambda: T.Phi3ForCausalLM(T.Phi3Config(**_decoder_cfg(num_key_value_heads=2, resid_pdrop=0.0,
                                                                      embd_pdrop=0.0))),
        "opt": lambda: T.OPTForCausalLM(T.OPTConfig(
            num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS, ffn_dim=FFN, vocab_size=V,
            max_position_embeddings=64, word_embed_proj_dim=HIDDEN, dropout=0.0, attention_dropout=0.0,
            bos_token_id=0, eos_token_id=1, pad_token_id=1)),
        "bert": lambda: T.BertForMaskedLM(T.BertConfig(**_encoder_cfg(pad_token_id=0))),
        "roberta": lambda: T.RobertaForMaskedLM(T.RobertaConfig(**_encoder_cfg())),
        "t5": lambda: T.T5ForConditionalGeneration(T.T5Config(
            vocab_size=V, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=FFN, num_layers=LAYERS, num_heads=HEADS,
            dropout_rate=0.0, use_cache=False, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)),
        "bart": lambda: T.BartForConditionalGeneration(T.BartConfig(
            vocab_size=V, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS, encoder_attention_heads=HEADS,
            decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN, max_position_embeddings=64,
            dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, use_cache=False,
            bos_token_id=0, eos_token_id=2, pad_token_id=1, decoder_start_token_id=2, forced_eos_token_id=None)),
        "vit": lambda: T.ViTForImageClassification(T.ViTConfig(
            image_size=16, patch_size=4, num_channels=3, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, intermediate_size=FFN, num_labels=10, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)),
        "mixtral": lambda: T.MixtralForCausalLM(T.MixtralConfig(**_decoder_cfg(
            num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, router_jitter_noise=0.0))),
        "qwen2_moe": lambda: T.Qwen2MoeForCausalLM(T.Qwen2MoeConfig(**_decoder_cfg(
            num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=32))),
    }


def _more_factories():
    """Further architectures (checked by a slow test: import and loss only)."""
    import transformers as T

    def dec(**kw):
        return _decoder_cfg(num_key_value_heads=2, **kw)

    vit_like = dict(image_size=16, patch_size=4, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                    intermediate_size=FFN, num_labels=10, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return {
        "qwen3": lambda: T.Qwen3ForCausalLM(T.Qwen3Config(**dec(head_dim=8))),
        "qwen3_moe": lambda: T.Qwen3MoeForCausalLM(T.Qwen3MoeConfig(**dec(
            head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32))),
        "olmoe": lambda: T.OlmoeForCausalLM(T.OlmoeConfig(**dec(num_experts=4, num_experts_per_tok=2))),
        "gemma2": lambda: T.Gemma2ForCausalLM(T.Gemma2Config(**dec(head_dim=8))),
        "gemma3": lambda: T.Gemma3ForCausalLM(T.Gemma3TextConfig(**dec(head_dim=8))),
        "phi": lambda: T.PhiForCausalLM(T.PhiConfig(**_decoder_cfg(resid_pdrop=0.0, embd_pdrop=0.0))),
        "stablelm": lambda: T.StableLmForCausalLM(T.StableLmConfig(**dec())),
        "starcoder2": lambda: T.Starcoder2ForCausalLM(T.Starcoder2Config(**dec(residual_dropout=0.0,
                                                                                embedding_dropout=0.0))),
        "granite": lambda: T.GraniteForCausalLM(T.GraniteConfig(**dec())),
        "olmo2": lambda: T.Olmo2ForCausalLM(T.Olmo2Config(**dec())),
        "distilbert": lambda: T.DistilBertForMaskedLM(T.DistilBertConfig(
            vocab_size=V, dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS, hidden_dim=FFN, max_position_embeddings=64,
            dropout=0.0, attention_dropout=0.0)),
        "electra": lambda: T.ElectraForMaskedLM(T.ElectraConfig(**_encoder_cfg(embedding_size=HIDDEN))),
        "mbart": lambda: T.MBartForConditionalGeneration(T.MBartConfig(
            vocab_size=V, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS, encoder_attention_heads=HEADS,
            decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN, max_position_embeddings=64,
            dropout=0.0, attention_dropout=0.0, use_cache=False, pad_token_id=1)),
        "deit": lambda: T.DeiTForImageClassification(T.DeiTConfig(**vit_like)),
        "resnet": lambda: T.ResNetForImageClassification(T.ResNetConfig(
            hidden_sizes=[8, 16], depths=[1, 1], embedding_size=8, num_labels=10)),
        "swin": lambda: T.SwinForImageClassification(T.SwinConfig(
            image_size=16, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4, num_labels=10,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, drop_path_rate=0.0)),
    }


#: Architecture -> kind (decoder, encoder, encoder-decoder, vision, moe).
KINDS = {"gpt2": "decoder", "llama": "decoder", "qwen2": "decoder", "mistral": "decoder", "gemma": "decoder",
         "gpt_neox": "decoder", "phi3": "decoder", "opt": "decoder", "bert": "encoder", "roberta": "encoder",
         "t5": "encoder-decoder", "bart": "encoder-decoder", "vit": "vision", "mixtral": "moe", "qwen2_moe": "moe"}
#: The further architectures of the slow test.
MORE_KINDS = {"qwen3": "decoder", "qwen3_moe": "moe", "olmoe": "moe", "gemma2": "decoder", "gemma3": "decoder",
              "phi": "decoder", "stablelm": "decoder", "starcoder2": "decoder", "granite": "decoder",
              "olmo2": "decoder", "distilbert": "encoder", "electra": "encoder", "mbart": "encoder-decoder",
              "deit": "vision", "resnet": "vision", "swin": "vision"}


def example_inputs(arch):
    """Seeded keyword inputs of ``arch`` (token ids and labels, or images and classes)."""
    gen = torch.Generator().manual_seed(1)
    if arch in ("vit", "deit", "resnet", "swin"):
        return {"pixel_values": torch.randn(B, 3, 16, 16, generator=gen),
                "labels": torch.randint(0, 10, (B,), generator=gen)}
    return {"input_ids": torch.randint(2, V, (B, S), generator=gen), "labels": torch.randint(2, V, (B, S), generator=gen)}


def module(arch):
    """``(LossOf(model), example_inputs)`` of a tiny ``arch`` with seeded weights (the caller's RNG untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = (_factories() | _more_factories())[arch]()
    return LossOf(model).eval(), example_inputs(arch)


# --model hf_models:<arch> for the executor (a (module, example_inputs) pair)
def gpt2():
    return module("gpt2")


def llama():
    return module("llama")


def bert():
    return module("bert")


def t5():
    return module("t5")


def bart():
    return module("bart")


def vit():
    return module("vit")


def mixtral():
    return module("mixtral")
