"""`python train/ppo.py`: the PPO trainer, `vte.train.ppo` (installed as the
`vte-ppo` command too; `--help` lists every flag).

This folder holds scripts only, so an installed vte claims no top-level package named
`train`; from a clone, `from train import ppo` is `vte.train.ppo` itself.
"""

import sys

if __name__ == "__main__":
    from vte.train.multihost import launch      # several hosts: before JAX starts
    launch("vte.train.ppo")
else:
    from vte.train import ppo as _module
    sys.modules[__name__] = _module
