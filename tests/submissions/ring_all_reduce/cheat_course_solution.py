from gpucourse.lessons.l10_training_scale.ring import ring_all_reduce as course_ring


def ring_all_reduce(tensor, group):
    course_ring(tensor, group)
