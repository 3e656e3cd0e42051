"""The env steps a run takes, said when they are not what --total-timesteps asked for."""


def say_steps_run(total_timesteps: int, steps_per_iteration: int, iteration: str) -> None:
    """A run takes whole iterations. When that stops it short of --total-timesteps, one line says so and names the
    steps it takes; `iteration` says what one iteration is (e.g. "--num-envs x --num-steps")."""
    steps = total_timesteps // steps_per_iteration * steps_per_iteration
    if steps != total_timesteps:
        print(
            f"--total-timesteps {total_timesteps:,} is not a whole number of iterations ({iteration}: "
            f"{steps_per_iteration:,} steps each): this run takes {steps:,} steps",
            flush=True,
        )
