package dev.lockbroker.client;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyFactory;
import java.security.PrivateKey;
import java.security.spec.InvalidKeySpecException;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;

/**
 * PEM files as the JDK's security classes want them: the blocks of a file,
 * and a private key from {@code BEGIN PRIVATE KEY} (PKCS#8: RSA, EC or
 * Ed25519, what {@code openssl genrsa} writes on OpenSSL 3) or
 * {@code BEGIN RSA PRIVATE KEY} (PKCS#1, OpenSSL 1.x's {@code genrsa}),
 * which is wrapped into PKCS#8 here. Encrypted keys and SEC1
 * {@code BEGIN EC PRIVATE KEY} files are refused with the
 * {@code openssl pkcs8 -topk8 -nocrypt} command that converts them.
 */
final class Pem {
    /** One {@code -----BEGIN label-----} block. */
    static final class Block {
        final String label;
        final byte[] der;

        Block(String label, byte[] der) {
            this.label = label;
            this.der = der;
        }
    }

    private Pem() {
    }

    /** Every block of {@code text}, in order. */
    static List<Block> blocks(String text) {
        List<Block> blocks = new ArrayList<>();
        int at = 0;
        while (true) {
            int begin = text.indexOf("-----BEGIN ", at);
            if (begin < 0) {
                return blocks;
            }
            int labelEnd = text.indexOf("-----", begin + 11);
            if (labelEnd < 0) {
                throw new IllegalArgumentException("a PEM block's BEGIN line is not closed");
            }
            String label = text.substring(begin + 11, labelEnd);
            String endLine = "-----END " + label + "-----";
            int end = text.indexOf(endLine, labelEnd);
            if (end < 0) {
                throw new IllegalArgumentException("no \"" + endLine + "\"");
            }
            String body = text.substring(labelEnd + 5, end).replaceAll("\\s", "");
            if (body.contains(":")) {
                throw new IllegalArgumentException("an encrypted PEM block (" + label + ") is not supported: "
                        + "decrypt it with openssl pkcs8 -topk8 -nocrypt");
            }
            blocks.add(new Block(label, Base64.getDecoder().decode(body)));
            at = end + endLine.length();
        }
    }

    /** The private key in the PEM file {@code path}. */
    static PrivateKey privateKey(Path path) throws IOException {
        for (Block block : blocks(Files.readString(path, StandardCharsets.US_ASCII))) {
            switch (block.label) {
                case "PRIVATE KEY":
                    return pkcs8(block.der, path);
                case "RSA PRIVATE KEY":
                    return pkcs8(rsaPkcs1ToPkcs8(block.der), path);
                case "EC PRIVATE KEY":
                    throw new IllegalArgumentException(path + ": a SEC1 EC key; convert it to PKCS#8 with "
                            + "openssl pkcs8 -topk8 -nocrypt -in KEY -out KEY.pk8");
                case "ENCRYPTED PRIVATE KEY":
                    throw new IllegalArgumentException(path + ": an encrypted key is not supported; decrypt it with "
                            + "openssl pkcs8 -topk8 -nocrypt");
                default:
                    break;
            }
        }
        throw new IllegalArgumentException(path + " holds no PEM private key");
    }

    private static PrivateKey pkcs8(byte[] der, Path path) {
        PKCS8EncodedKeySpec spec = new PKCS8EncodedKeySpec(der);
        for (String algorithm : new String[] {"RSA", "EC", "Ed25519", "RSASSA-PSS"}) {
            try {
                return KeyFactory.getInstance(algorithm).generatePrivate(spec);
            } catch (InvalidKeySpecException | java.security.NoSuchAlgorithmException notThisOne) {
                // try the next
            }
        }
        throw new IllegalArgumentException(path + ": a PKCS#8 key of an algorithm this JDK cannot read");
    }

    /**
     * A PKCS#1 {@code RSAPrivateKey} wrapped as PKCS#8:
     * {@code SEQUENCE { INTEGER 0, SEQUENCE { OID rsaEncryption, NULL }, OCTET STRING pkcs1 }}.
     */
    static byte[] rsaPkcs1ToPkcs8(byte[] pkcs1) {
        byte[] version = {0x02, 0x01, 0x00};
        byte[] algorithm = {0x30, 0x0d, 0x06, 0x09, 0x2a, (byte) 0x86, 0x48, (byte) 0x86, (byte) 0xf7, 0x0d, 0x01,
            0x01, 0x01, 0x05, 0x00};
        byte[] key = der(0x04, pkcs1);
        ByteArrayOutputStream inner = new ByteArrayOutputStream();
        inner.writeBytes(version);
        inner.writeBytes(algorithm);
        inner.writeBytes(key);
        return der(0x30, inner.toByteArray());
    }

    /** A DER element: {@code tag}, its definite length, {@code content}. */
    private static byte[] der(int tag, byte[] content) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.write(tag);
        int n = content.length;
        if (n < 0x80) {
            out.write(n);
        } else {
            int bytes = n > 0xffffff ? 4 : n > 0xffff ? 3 : n > 0xff ? 2 : 1;
            out.write(0x80 | bytes);
            for (int i = bytes - 1; i >= 0; i--) {
                out.write((n >>> (8 * i)) & 0xff);
            }
        }
        out.writeBytes(content);
        return out.toByteArray();
    }
}
