"""dit_lora.modelfiles"""
