"""Running schedules: compile kernels (cached), allocate buffers, launch."""
