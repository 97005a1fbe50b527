"""The chat templates bringup.fetch.synth writes into generated GGUFs whose vocabulary has none."""
from __future__ import annotations

# The families' turn formats as Jinja chat templates, for vocabularies without one: exactly what
# llama.cpp's llm_chat_apply_template renders for them (src/llama-chat.cpp), so a parity run can
# render chat prompts from the GGUF as for a downloaded model.
MISTRAL_V7_TEKKEN = (  # LLM_CHAT_TEMPLATE_MISTRAL_V7_TEKKEN
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ '[SYSTEM_PROMPT]' + m['content'] + '[/SYSTEM_PROMPT]' }}"
    "{% elif m['role'] == 'user' %}{{ '[INST]' + m['content'] + '[/INST]' }}"
    "{% else %}{{ m['content'] + eos_token }}{% endif %}{% endfor %}")
GEMMA = (  # LLM_CHAT_TEMPLATE_GEMMA: system text merged into the next user turn, contents trimmed
    "{{ bos_token }}{% set ns = namespace(system='') %}{% for m in messages %}"
    "{% if m['role'] == 'system' %}{% set ns.system = ns.system + (m['content'] | trim) %}{% else %}"
    "{% set role = 'model' if m['role'] == 'assistant' else m['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' }}"
    "{% if ns.system and role != 'model' %}{{ ns.system + '\n\n' }}{% set ns.system = '' %}{% endif %}"
    "{{ (m['content'] | trim) + '<end_of_turn>\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}")
