"""dit_lora.core"""
