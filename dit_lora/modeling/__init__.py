"""dit_lora.modeling"""
