"""Adapters to the RL stacks users already have.

    from vte.adapters.gymnax import ClusterEnv          # needs `pip install -e ".[gymnax]"`
    from vte.adapters.gymnasium import ClusterEnv        # needs `pip install -e ".[gymnasium]"`

`vte.cluster.spaces` holds what both share (the observation's fields with their shapes,
dtypes and bounds, and its flat form) and imports neither library; each adapter module
imports its own library, so `import vte` needs neither.
"""
