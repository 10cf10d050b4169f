"""``python -m dit_lora COMMAND``: the ``dit-lora`` console script without its installed entry point.

``python -m dit_lora train --config run.yaml`` trains; ``accelerate launch -m dit_lora train ...`` and
``dit-lora launch -m dit_lora train ...`` run it under a launcher (one process per device with
``--multi_gpu``).
"""

from dit_lora.commands.cli import main

if __name__ == "__main__":
    main()
