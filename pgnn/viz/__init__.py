"""Pictures: bird's-eye views and images with boxes."""
