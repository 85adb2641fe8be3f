"""`python train/ppo.py`: the PPO trainer, `vte.train.ppo` (installed as the
`vte-ppo` command too; `--help` lists every flag).

This folder holds scripts only, so an installed vte claims no top-level package named
`train`; from a clone, `from train import ppo` is `vte.train.ppo` itself.
"""

import sys

if __name__ == "__main__":
    from vte.train import multihost      # several hosts: before JAX starts
    multihost.initialize_from_command_line()
    from vte.train.ppo import main
    main()
else:
    from vte.train import ppo as _module
    sys.modules[__name__] = _module
