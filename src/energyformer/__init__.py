"""energyformer: transformer layers as energy minimisation — an energy, a descent rule and a number of steps."""

__version__ = "0.1.0"
