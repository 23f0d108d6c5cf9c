"""fabric-te: traffic-engineering controller for AI-training datacenter fabrics."""

__version__ = "0.1.0"
