"""Step counting: the env steps a run takes, said when they are not what --total-timesteps asked for, and the
updates due as the step counter advances by --num-envs."""


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


def updates_due(global_step: int, num_envs: int, every: int) -> int:
    """How many multiples of `every` the step counter passed in the vector step that took it from
    global_step - num_envs to global_step: the gradient steps (every = --train-frequency), target updates or log
    lines due then. Over a run they add up to total_timesteps // every for any env count."""
    return global_step // every - (global_step - num_envs) // every
