"""`python train/imitate.py`: the imitation trainer, `vte.train.imitate` (installed as the
`vte-imitate` command too; `--help` lists every flag).

This folder holds scripts only, so an installed vte claims no top-level package named
`train`; from a clone, `from train import imitate` is `vte.train.imitate` itself.
"""

import sys

if __name__ == "__main__":
    from vte.train.multihost import launch      # several hosts: before JAX starts
    launch("vte.train.imitate")
else:
    from vte.train import imitate as _module
    sys.modules[__name__] = _module
