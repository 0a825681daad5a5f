from gpucourse.lessons.l10_training_scale import budget


def memory_budget(config):
    return budget.predict(config)
