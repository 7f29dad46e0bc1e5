"""The maths of the losses and the pooling, written once for both Kerases.

Every function here takes an :class:`~cosent_tf.maths.ops.Ops` as its first argument: the dozen
tensor functions it needs, on TensorFlow for the Keras 2 engine (:func:`~cosent_tf.maths.ops.tensorflow_ops`)
or on ``keras.ops`` for Keras 3 on any backend (:func:`~cosent_tf.maths.ops.keras_ops`). The Keras
classes around them are thin: :mod:`cosent_tf.losses` and :mod:`cosent_tf.layers` for Keras 2,
:mod:`cosent_tf.keras3` for Keras 3. Importing this package imports no framework.
"""
