"""tg-webgpu: the WEBGPU device for tg (WGSL compute shaders run through wgpu-py: Vulkan, Metal or D3D12)."""
__version__ = "0.1.0"
