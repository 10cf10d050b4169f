"""dit_lora.commands"""
