// Folders of class folders of images (Keras's image_dataset_from_directory, torchvision's
// ImageFolder): DIR/<class>/**/<image>.{jpg,jpeg,png,bmp,gif} decoded with the libraries made
// for them (TurboJPEG, libpng, giflib), resized as Keras resizes them, decoded once into a uint8
// cache file that later runs map instead of decoding again.
#ifndef HETRAIN_DATA_IMAGES_H
#define HETRAIN_DATA_IMAGES_H

#include <stddef.h>
#include <stdint.h>

#include "core/common.h"
#include "data/data.h"

// How a folder's images become samples.
typedef struct data_images_opts {
    int h, w;     // the size every image is resized to
    int channels; // 1: grayscale (Keras's color_mode "grayscale"), 3: RGB (an alpha dropped)
    int crop;     // crop the largest centred window of the target's aspect ratio first (Keras's
                  // crop_to_aspect_ratio, smart_resize)
    float scale;  // a pixel byte b becomes b * scale: 1 (Keras's pipeline: 0..255) or 1/255
    int strict;   // the first broken file is an error instead of a line and a skip
    const char *cache_dir; // the cache's folder (its images/ subfolder); NULL: none
    int threads;  // decoding threads (0: all cores)
    int progress; // a progress line on stderr while decoding
} data_images_opts;

// What a folder gave: its classes (sorted byte-wise, as Keras and torchvision sort them), each
// sample's file (relative to the folder), the files skipped and why (one line each), whether
// the cache held it.
typedef struct data_images_info {
    int n_classes;
    char **classes;
    int n;        // samples (files decoded)
    char **files; // n of them
    int n_skipped;
    char *skipped; // the skipped files' lines, '\n'-terminated ("" when none)
    int cached;    // read from the cache file
    char cache_path[1024]; // the cache file ("" without one)
    double seconds;        // decoding (or reading the cache)
} data_images_info;

// Whether path is a folder (an image folder when it is neither an IDX nor a CIFAR folder).
int data_is_dir(const char *path);

// Loads every image under dir into d (float pixels (n,c,h,w), one label a sample: its class's
// index) and info. A folder without class folders, a class folder without images, more than
// DATA_MAX_CLASSES classes, or (strict) a broken file: -1 with one line naming the folder or
// file. A broken file otherwise is listed in info->skipped and left out.
int dataset_load_images(dataset *d, data_images_info *info, const char *dir,
                        const data_images_opts *o, ht_error *e);

void data_images_info_free(data_images_info *info);

// Fails unless b has a's classes (a test or validation folder against the training one),
// naming both folders and the first class that differs.
int data_images_same_classes(const data_images_info *a, const char *a_dir,
                             const data_images_info *b, const char *b_dir, ht_error *e);

#endif
